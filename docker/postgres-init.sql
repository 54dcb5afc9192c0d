-- One database per service: each owns its tables and its migrations.
CREATE DATABASE cluster;
CREATE DATABASE platform;

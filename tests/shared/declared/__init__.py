"""Resource modules that only the start-up tests load (``RESOURCE_MODULES``), in processes of their own."""

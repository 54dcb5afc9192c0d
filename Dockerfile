# One image for both services and the reconciler; docker-compose.yml picks the command.
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOST=0.0.0.0
COPY pyproject.toml setup.cfg README.md ./
COPY shared shared
COPY cluster_svc cluster_svc
COPY platform_svc platform_svc
COPY client client
RUN pip install --no-cache-dir ./client . && useradd --system --no-create-home app
USER app

# events-svc service image. Point EVENTS_DATABASE_URL at your PostgreSQL in production;
# without it the service starts the embedded PostgreSQL in /data (single-node trials only).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    EVENTS_HOST=0.0.0.0 \
    EVENTS_PORT=8000 \
    EVENTS_DATA_DIR=/data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
COPY sql ./sql
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /data events \
    && mkdir -p /data && chown events /data \
    && rm -rf /app/src /app/sql

USER events
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s \
    CMD python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"
CMD ["events-svc", "serve"]

# recalld on slim Python 3.12 with CPU-only torch. Talks to the PostgreSQL in DATABASE_URL
# (see docker-compose.yml); without it, it runs the embedded PostgreSQL in /data.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    RECALLD_DATA_DIR=/data \
    RECALLD_HOST=0.0.0.0 \
    RECALLD_PORT=8080

WORKDIR /app

# CPU wheels of torch first, so the project install does not pull the multi-GB CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch

COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY recalld_tools ./recalld_tools
COPY migrations ./migrations
# Editable on purpose: app/infra/migrate.py finds alembic.ini and migrations/ next to the app package.
RUN pip install -e .

RUN useradd --create-home --uid 10001 recalld \
    && mkdir -p /data \
    && chown recalld:recalld /data
USER recalld
VOLUME ["/data"]
EXPOSE 8080

HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=5 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/readyz').status == 200 else 1)"

ENTRYPOINT ["recalld"]
CMD ["serve"]

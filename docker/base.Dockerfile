# Conch base image: Python, a venv at /opt/conch with every core dependency of Conch (not Conch
# itself), the conch user, the healthcheck and conch-pip. Every Conch CPU image derives from it,
# so the dependencies are built once and shared as one layer; a code change rebuilds in seconds.
# Build it first, from the repository root:
#   docker compose --profile base build base
#   (or: docker build -f docker/base.Dockerfile -t conch/base:0.1.0 .)
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# The requirement lists of pyproject.toml: core and each extra, one file each. A change to
# pyproject.toml that leaves them alone leaves the dependency layer below cached.
FROM ${PYTHON_IMAGE} AS requirements
WORKDIR /src
COPY pyproject.toml docker/requirements.py ./
RUN python requirements.py pyproject.toml /requirements

FROM ${PYTHON_IMAGE} AS build
RUN python -m venv /opt/conch
COPY docker/constraints.txt /tmp/constraints.txt
COPY docker/conch-pip /usr/local/bin/conch-pip
COPY --from=requirements /requirements /opt/conch/requirements
# setuptools and wheel: the derived images build Conch's wheel without fetching it again.
RUN --mount=type=secret,id=ca \
    conch-pip install --constraint /tmp/constraints.txt -r /opt/conch/requirements/core.txt setuptools wheel

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 conch \
 && useradd --system --uid 10001 --gid conch --no-create-home --shell /usr/sbin/nologin conch
COPY --from=build /opt/conch /opt/conch
COPY docker/conch-pip /usr/local/bin/conch-pip
COPY docker/healthcheck.py /usr/local/bin/conch-healthcheck
COPY docker/constraints.txt /opt/conch/constraints.txt
ENV PATH=/opt/conch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "/usr/local/bin/conch-healthcheck"]
CMD ["python"]

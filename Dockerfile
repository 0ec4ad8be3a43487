# syntax=docker/dockerfile:1

# Debian 12, to match the distroless runtime below.
FROM --platform=${BUILDPLATFORM} debian:12-slim AS build

RUN --mount=type=cache,target=/var/lib/apt/lists \
    --mount=type=cache,target=/var/cache/apt \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install --no-install-recommends --yes python3-venv

ENV PYTHONDONTWRITEBYTECODE=true

# Build the wheel, then install it alone, with every dependency at the version
# requirements.lock pins, into a fresh venv. tests/product/test_package.py runs these
# same steps.
WORKDIR /build
RUN --mount=target=. \
    --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /venv/build \
    && /venv/build/bin/pip wheel --no-deps --wheel-dir /whl . \
    && python3 -m venv /venv/fn \
    && /venv/fn/bin/pip install -c requirements.lock /whl/*.whl

# The venv keeps its path so its shebangs and symlinks still work.
FROM gcr.io/distroless/python3-debian12 AS image
WORKDIR /
COPY --from=build /venv/fn /venv/fn
EXPOSE 9443
USER nonroot:nonroot
ENTRYPOINT ["/venv/fn/bin/function"]

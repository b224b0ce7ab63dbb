# syntax=docker/dockerfile:1
# The agent's image for machines that can pull base images:
#
#   docker build -t ghcr.io/tuist/kura-health-agent:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" .
#
# The same image as scripts/image.sh builds without pulling anything: a
# glibc release binary with its dependency list embedded by cargo auditable
# (the build profile of every figure in benches/PERFORMANCE.md; musl's
# allocator measured slower, see the README's "Container image"), on a
# distroless cc root file system (the C library, libgcc, CA certificates;
# no shell, no package manager), user 65532, the same entrypoint, command,
# port and OCI labels. Debian 12 on both sides, so the binary runs on the
# glibc it was linked against.

FROM rust:1.95-bookworm AS build
RUN cargo install --locked cargo-auditable@0.7.7
WORKDIR /src
COPY . .
# The product binary: `run` only, without the tools (check, baseline, demo,
# aggregate, simulate, fleet-load-side: kura-agent's default `tools` feature).
RUN cargo auditable build --locked --profile product -p kura-agent --bin kura-agent \
      --no-default-features \
    && cp target/product/kura-agent /kura-agent

FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=https://github.com/tuist/kura-health-agent
COPY --from=build /kura-agent /usr/local/bin/kura-agent
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 8080/tcp
ENTRYPOINT ["/usr/local/bin/kura-agent"]
CMD ["run"]
LABEL org.opencontainers.image.title="kura-health-agent" \
      org.opencontainers.image.description="Kura rollout-health agent: polls every Kura pod's /status/rollout and publishes status.rolloutHealth and status.rolloutGate on each KuraInstance" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"

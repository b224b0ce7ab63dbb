# syntax=docker/dockerfile:1
# Multi-stage build of kura-agent: a static (musl) release binary in a
# minimal non-root image. Build: docker build -t kura-health-agent .

FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --locked --release --target x86_64-unknown-linux-musl -p kura-agent --bin kura-agent \
    && cp target/x86_64-unknown-linux-musl/release/kura-agent /kura-agent

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /kura-agent /usr/local/bin/kura-agent
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kura-agent"]
CMD ["run"]

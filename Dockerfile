# syntax=docker/dockerfile:1
# The Converge image: a static binary on Debian slim with the database
# clients the backup-before-delete controller runs (pg_dump and psql 15,
# mariadb-dump and mariadb) and the tools the LoadBalancer and DHCP agents run
# (nft, ip). It runs as non-root; the LoadBalancer agent's DaemonSet runs it
# as root. Build with `make docker-build` (VERSION is stamped into the binary).

FROM golang:1.26 AS builder
ARG VERSION=dev
WORKDIR /src

# Dependencies first, so that this layer is cached until go.mod/go.sum change.
COPY go.mod go.sum ./
RUN go mod download

# Everything else .dockerignore lets through (sources and the embedded
# manifests under config/).
COPY . .
# The tag leaves out kustomize's Go-plugin loader (see GOTAGS in the Makefile).
RUN CGO_ENABLED=0 go build -trimpath -tags kustomize_disable_go_plugin_support \
    -ldflags "-s -w -X github.com/converge-dev/converge/internal/version.Version=${VERSION}" \
    -o /converge ./cmd/converge

# pg_dump must be at least the server's major version: Debian 12 ships 15.
# For newer servers, add the PostgreSQL (PGDG) repository and its client.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-client-15 mariadb-client ca-certificates nftables iproute2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=builder /converge /converge
USER 65532:65532
ENTRYPOINT ["/converge"]
CMD ["run"]

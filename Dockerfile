# syntax=docker/dockerfile:1
# The Converge manager image: a static binary on distroless, running as
# non-root. Build with `make docker-build` (VERSION is stamped into the binary).

FROM golang:1.26 AS builder
ARG VERSION=dev
WORKDIR /src

# Dependencies first, so that this layer is cached until go.mod/go.sum change.
COPY go.mod go.sum ./
RUN go mod download

# Everything else .dockerignore lets through (sources and the embedded
# manifests under config/).
COPY . .
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/converge-dev/converge/internal/version.Version=${VERSION}" \
    -o /converge ./cmd/converge

FROM gcr.io/distroless/static:nonroot
COPY --from=builder /converge /converge
USER 65532:65532
ENTRYPOINT ["/converge"]
CMD ["run"]

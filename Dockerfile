# cnperf with the external tools the seed's task types run (iperf3, iperf 2,
# ping, traceroute), for users who want those:
#   docker build -t REGISTRY/cnperf-tools:TAG .
# The released image (ghcr.io/cnperf/cnperf:TAG) and `cnperf image push` /
# `cnperf k8s deploy --push` hold the static binary alone (cnperf's own
# probes), built without Docker; `cnperf image build -o cnperf.tar` writes
# that image for `ctr images import`.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/cnperf ./cmd/cnperf

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends iperf3 iperf iputils-ping traceroute ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/cnperf /cnperf
RUN ln -s /cnperf /usr/local/bin/cnperf
# The manifests drop every capability but NET_RAW (server) and NET_ADMIN
# plus NET_RAW (agents).
EXPOSE 8080 5201
ENTRYPOINT ["/cnperf"]

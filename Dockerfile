# cnperf for users with Docker: the static cnperf binary plus the tools the
# seed's task types run (iperf3, iperf 2, ping, traceroute).
#   docker build -t cnperf/cnperf:latest .
# Without Docker or a registry, `cnperf image build -o cnperf.tar` writes an
# image of the binary alone (cnperf's own probes) for `ctr images import`.
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

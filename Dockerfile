# syntax=docker/dockerfile:1
#
# One image for every agentmesh service: `agentmesh <subcommand>` (state,
# registry, scheduler, executor, router, scripted-model, dev). The executor
# re-executes this same binary as its agents' child processes, so the runtime
# stage also carries what the agents' code tools call: python3 and node.
#
#   docker build -t agentmesh:dev .            (or: make image)
#   docker run --rm -p 7400:7400 agentmesh:dev dev

FROM golang:1.26-bookworm AS build
WORKDIR /src
# As `make build`: the server with cgo (measured with 1,000 tasks in flight, a
# static one answered SubmitTask/GetTask with a ~50% higher p99), the agent
# child static and without gRPC's x/net/trace (smaller, quicker to start);
# docs/benchmarks.md, 2026-11-23. The runtime stage is the same Debian
# release, so the server finds the glibc it was linked against.
ENV CGO_ENABLED=1 GOFLAGS=-buildvcs=false
COPY go.mod go.sum go.work ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath \
      -ldflags "-s -w -X github.com/agentmesh/agentmesh/services/app.Version=${VERSION}" \
      -o /out/ ./services/cmd/agentmesh ./services/cmd/amctl \
 && CGO_ENABLED=0 go build -trimpath -tags grpcnotrace,agentmesh_nogrpc \
      -ldflags "-s -w -X github.com/agentmesh/agentmesh/services/app.Version=${VERSION}" \
      -o /out/ ./services/cmd/agentmesh-agent

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 nodejs \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 agentmesh \
 && useradd --system --uid 10001 --gid agentmesh --create-home --home-dir /home/agentmesh agentmesh
COPY --from=build /out/agentmesh /out/agentmesh-agent /out/amctl /usr/local/bin/
# In a container the servers listen on every interface (the binary's defaults
# are loopback-only); dev keeps its embedded NATS data under the home dir.
ENV AGENTMESH_LISTEN=0.0.0.0:7400 \
    AGENTMESH_SCRIPTED_LISTEN=0.0.0.0:7401 \
    AGENTMESH_DATA_DIR=/home/agentmesh/data
USER 10001:10001
WORKDIR /home/agentmesh
EXPOSE 7400 7401
ENTRYPOINT ["agentmesh"]
CMD ["dev"]

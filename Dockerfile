# syntax=docker/dockerfile:1
# Every Exacto image, from this one recipe; the service is the build argument, the
# context the repository root (go.work resolves the workspace):
#   docker build --build-arg SERVICE=gateway -t exacto/gateway .
# SERVICE is a directory of services/ with a main.go:
#   exacto      the CLI: `exacto up` (the whole pipeline on an embedded NATS: webhooks
#               8080, admin 8081, NATS 4222, platform sandbox 8082; set EXACTO_HTTP_ADDR,
#               EXACTO_ADMIN_ADDR, EXACTO_NATS_LISTEN and EXACTO_SANDBOX_ADDR to
#               0.0.0.0:<port> and mount a volume at EXACTO_DATA_DIR) and the operator's
#               tools (dlq, events show, replay, send, reconcile, tail). The default.
#   gateway     the webhook gateway alone, webhooks on EXACTO_HTTP_ADDR (8080)
#   classifier, stopper, crmwriter, suppressor, projector: one consumer alone
#   reconciler  the scheduled reconciliation, the DLQ watch and the console
# All but the CLI run against EXACTO_NATS_URL and serve /healthz /readyz /metrics on
# EXACTO_ADMIN_ADDR (8081), the one port every image has; the gateway's 8080 and
# `exacto up`'s others are published by compose and Kubernetes, which name them.
ARG SERVICE=exacto

FROM golang:1.26.8 AS build
ARG SERVICE
WORKDIR /src
ENV CGO_ENABLED=0
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    if [ ! -f "services/${SERVICE}/main.go" ]; then \
      echo "SERVICE=${SERVICE} is no service; one of:" $(cd services && ls */main.go | sed 's,/main.go,,') >&2; exit 1; \
    fi && \
    go build -trimpath -ldflags="-s -w" -o /out/service "./services/${SERVICE}"

# Static binary on distroless (CA certificates and tzdata, no shell), as nonroot.
FROM gcr.io/distroless/static-debian12:nonroot
ARG SERVICE
LABEL org.opencontainers.image.title="exacto-${SERVICE}"
COPY --from=build /out/service /usr/local/bin/service
WORKDIR /home/nonroot
USER 65532:65532
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/service"]

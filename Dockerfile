# kvgate: one image for every role.
#
#   docker build -t kvgate:0.1.0 .
#   docker run --rm -p 9002:9002 -p 9003:9003 -v "$PWD/config:/etc/kvgate/config:ro" \
#     -v "$PWD/keys:/etc/kvgate/keys:ro" kvgate:0.1.0 gate --config /etc/kvgate/config/gate.yaml
#   docker run --rm kvgate:0.1.0 sidecar --config /etc/kvgate/sidecar/sidecar.yaml   # beside each vLLM worker
#   docker run --rm kvgate:0.1.0 policy check /etc/kvgate/policy/route-table.yaml  # and explain, verify, fingerprint
#
# The runtime image carries the product only. The testbed (simulated vLLM workers, the Envoy-faithful harness, the
# demo topology) is test support and runs from a clone: `npm start`, `npm run testbed -- sim --config sim.yaml`.
#
# Deployment notes: docs/operator-guide.md; Kubernetes examples: deploy/kubernetes/.

ARG NODE_IMAGE=node:24-slim

# ── build: full dependency tree, strict TypeScript build ───────────────────────────────────────────────────────────
FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# The product only (tsconfig.build.json leaves out tests, testing.ts fakes and the testbed); source maps point at
# .ts files the image does not carry, so they stay behind.
RUN npx tsc -p tsconfig.build.json \
 && find dist -name '*.js.map' -delete

# ── runtime: production dependencies and the compiled output only ──────────────────────────────────────────────────
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /src/dist/src ./dist/src
# protos/ holds the ext_proc protos the gate loads at start (and protos/UPSTREAM.md, which marks the package root);
# envoy/ the reference Envoy configuration; examples/ the example descriptors and route tables.
COPY protos ./protos
COPY envoy ./envoy
COPY examples ./examples
COPY deploy/healthcheck.mjs ./deploy/healthcheck.mjs

# A fixed non-root uid/gid, so Kubernetes `runAsUser: 10001` / `runAsNonRoot: true` and file permissions on mounted
# secrets line up. Nothing under /app is writable by it, and kvgate writes nothing outside /tmp.
RUN groupadd --system --gid 10001 kvgate \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kvgate
USER 10001:10001

# 9002: ext_proc + grpc.health.v1 (the gate). 9003: admin HTTP /metrics /status /healthz (the gate).
# 9090: the sidecar's one port (its default `listen`). Ports are the config files' choice; these are the defaults.
EXPOSE 9002 9003 9090

# Health of the GATE: grpc.health.v1 Check of service envoy.service.ext_proc.v3.ExternalProcessor on 127.0.0.1:9002
# (NOT_SERVING while draining). Override per role with environment variables (deploy/healthcheck.mjs):
#   sidecar: KVGATE_HEALTH_URL=http://127.0.0.1:9090/healthz   (503 while unverified or draining)
#   one-shot commands (policy check, explain, verify, fingerprint): `docker run --no-healthcheck`.
# Kubernetes ignores HEALTHCHECK: its probes are in deploy/kubernetes/.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 CMD ["node", "/app/deploy/healthcheck.mjs"]

ENTRYPOINT ["node", "/app/dist/src/cli/main.js"]
CMD ["--help"]

# One image for every function; the function is chosen at start (see `node dist/bundle/main.js --help`):
#   FUNCTION=admit|cancel|demand|lifecycle|source   one function on its JetStream consumer (KEDA Deployments)
#   FUNCTION=<name> TRANSPORT=http                  one function as a Knative Service (CloudEvents on POST /)
#   FUNCTION=ingress                                the gateway ingress (INGRESS_TOKEN_FILE from a Secret)
#   FUNCTION=bridge                                 JetStream → Knative Broker (K_SINK from a SinkBinding)
#   FUNCTION=provision                              create the NATS topology, then exit (the provision Job)
#   NATS_PROVISION=false                            bind to the provisioned topology (deployed functions)
#   FUNCTION=all (default)                          everything in one process, as `npm start`
# and a second entry point, the reference backfill workload (cmd/model-eval), as a CronJob template's command:
#   node dist/bundle/model-eval.js                  deploy/examples/model-eval-gauntlet.yaml
# Build: docker build -t model-backfill .
# The entry point is an esbuild bundle (dev/scripts/bundle.mjs, run by `npm run build`): a function loads a few minified
# files instead of ~2,000 modules from node_modules, and only its mode's and its function's code: demand and source
# never load the Kubernetes client, and no process loads the OpenTelemetry SDK unless OTEL_* turns tracing on
# (cold start; test/integration/transport/cold-start-modules.test.ts).
# Node 24 LTS (Node 20 reached its end of life in April 2026); the bundle targets node20, so it still runs there.
FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# The gateway client (clients/ts, @flexinfer/gateway-emitter) is an npm workspace of package.json: npm ci needs its
# package.json to install what package-lock.json records. The bundle takes nothing from it: the functions make their
# NATS connection options themselves (pkg/jetstream/connect.ts).
COPY clients/ts ./clients/ts
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY pkg ./pkg
COPY events ./events
COPY functions ./functions
COPY cmd ./cmd
COPY dev/scripts/bundle.mjs ./dev/scripts/bundle.mjs
RUN npm run build

FROM node:24-slim
ENV NODE_ENV=production
WORKDIR /app
# The bundle carries its dependencies; nothing is installed here.
COPY --from=build /app/dist/bundle ./dist/bundle
# Knative sets PORT (8080); the JetStream functions serve /metrics, /healthz and /readyz on it too.
ENV HOST=0.0.0.0 PORT=8080
EXPOSE 8080
# Node's compile cache, filled here once: a function's start reads V8's code for the bundle's modules instead of
# compiling them. Kept per uid, so it is filled as the user the pods run as (node, uid 1000: runAsUser in the
# manifests); read-only at run time (readOnlyRootFilesystem), where what it lacks is compiled as before.
ENV NODE_COMPILE_CACHE=/app/.compile-cache
RUN mkdir /app/.compile-cache && chown node /app/.compile-cache
USER node
RUN node dist/bundle/main.js --warm-compile-cache
ENTRYPOINT ["node", "dist/bundle/main.js"]

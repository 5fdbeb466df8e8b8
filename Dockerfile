# One image for every function; the function is chosen at start (see `node dist/bundle/main.js --help`):
#   FUNCTION=admit|cancel|demand|lifecycle|source   one function on its JetStream consumer (KEDA Deployments)
#   FUNCTION=<name> TRANSPORT=http                  one function as a Knative Service (CloudEvents on POST /)
#   FUNCTION=ingress                                the gateway ingress (INGRESS_TOKEN_FILE from a Secret)
#   FUNCTION=bridge                                 JetStream → Knative Broker (K_SINK from a SinkBinding)
#   FUNCTION=provision                              create the NATS topology, then exit (the provision Job)
#   NATS_PROVISION=false                            bind to the provisioned topology (deployed functions)
#   FUNCTION=all (default)                          everything in one process, as `npm start`
# Build: docker build -t model-backfill .
# The entry point is an esbuild bundle (scripts/bundle.mjs, run by `npm run build`): a function loads a few minified
# files instead of ~2,000 modules from node_modules, and only its mode's and its function's code: demand and source
# never load the Kubernetes client, and no process loads the OpenTelemetry SDK unless OTEL_* turns tracing on
# (cold start; test/integration/transport/cold-start-modules.test.ts).
FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY core ./core
COPY lib ./lib
COPY events ./events
COPY observability ./observability
COPY jetstream ./jetstream
COPY kube ./kube
COPY transport ./transport
COPY admission ./admission
COPY functions ./functions
COPY process ./process
COPY scripts/bundle.mjs ./scripts/bundle.mjs
RUN npm run build

FROM node:20-slim
ENV NODE_ENV=production
WORKDIR /app
# The bundle carries its dependencies; nothing is installed here.
COPY --from=build /app/dist/bundle ./dist/bundle
# Knative sets PORT (8080); the JetStream functions serve /metrics, /healthz and /readyz on it too.
ENV HOST=0.0.0.0 PORT=8080
EXPOSE 8080
USER node
ENTRYPOINT ["node", "dist/bundle/main.js"]

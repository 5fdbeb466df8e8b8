// The OpenTelemetry SDK side of pkg/observability/tracing.ts: the tracer provider, the OTLP/HTTP exporter and the context
// manager. Loaded by startTracing() only when tracing is on, so a process with tracing off never loads the SDK or the
// exporter (~0.2 MB of the bundle and their set-up at every cold start).
import { AsyncLocalStorage } from 'node:async_hooks'
import { type Context, type ContextManager, context, ROOT_CONTEXT, trace } from '@opentelemetry/api'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { resourceFromAttributes } from '@opentelemetry/resources'
import {
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  SimpleSpanProcessor,
  type SpanExporter,
  TracerProvider,
} from '@opentelemetry/sdk-trace'

/** AsyncLocalStorage as OpenTelemetry's context manager: a handler's context follows it across awaits. */
class AsyncContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>()
  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    ctx: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    return this.storage.run(ctx, () => fn.apply(thisArg, args))
  }
  bind<T>(ctx: Context, target: T): T {
    if (typeof target !== 'function') return target
    const manager = this
    return function (this: unknown, ...args: unknown[]) {
      return manager.with(ctx, () => target.apply(this, args))
    } as T
  }
  enable() {
    return this
  }
  disable() {
    this.storage.disable()
    return this
  }
}

/** Makes the provider and registers it and the context manager as this process's globals. */
export interface TracingOptions {
  /** Default: the OTLP/HTTP exporter configured by the OTEL_EXPORTER_OTLP_* variables. */
  exporter?: SpanExporter
  /** service.name (cmd/manager/config.ts: OTEL_SERVICE_NAME, else `model-backfill-<FUNCTION>`); default model-backfill. */
  serviceName?: string
  /** Export each span as it ends (tests); default batched. */
  simple?: boolean
}

export function startProvider(opts: TracingOptions): TracerProvider {
  const exporter = opts.exporter ?? new OTLPTraceExporter()
  const provider = new TracerProvider({
    resource: resourceFromAttributes({
      'service.name': opts.serviceName ?? 'model-backfill',
    }),
    spanProcessors: [
      opts.simple
        ? new SimpleSpanProcessor({ exporter })
        : new BatchSpanProcessor({ exporter, scheduledDelayMillis: 1000 }),
    ],
    sampler: new ParentBasedSampler({ root: new AlwaysOnSampler() }),
  })
  trace.setGlobalTracerProvider(provider)
  context.setGlobalContextManager(new AsyncContextManager().enable())
  return provider
}

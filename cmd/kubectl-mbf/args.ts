// Command line of `kubectl mbf` (kubectl hands a plugin every argument after its name). Pure, so the flags are
// unit-tested; unknown flags are an error rather than silently ignored.

export const USAGE = `kubectl mbf — what ModelBackfill is doing and why

Usage:
  kubectl mbf explain NAME [-n NAMESPACE]   each gate with its evidence and verdict, the next timer, the last cancel
  kubectl mbf get [NAME] [-n NS | -A]       table: phase, reason, time left in the window, last preemption
  kubectl mbf status                        same as get
  kubectl mbf top [-n NS | -A]              per model: foreground rate, idle ratio, useful seconds, preemptions

Flags:
  -n, --namespace NS     namespace (default: the kubeconfig context's, else "default")
  -A, --all-namespaces   every namespace (get, top)
  -o, --output FORMAT    text (default) or json
      --kubeconfig PATH  kubeconfig (default: $KUBECONFIG, else ~/.kube/config)
      --context NAME     kubeconfig context
      --nats-url URL     NATS servers (default: $NATS_URL, else the NATS context, else nats://127.0.0.1:4222)
      --nats-context N   a \`nats\` CLI context: a name (~/.config/nats/context/N.json) or a .json file (default: $NATS_CONTEXT)
      --metrics-url URL  top: read useful seconds and preemptions from this /metrics endpoint
      --interval DUR     top: sample the foreground traffic this long (default 5s; 0 skips the sample)
      --timeout DUR      deadline of every request (default 5s)
      --instance NAME    the functions' instance name, when several systems share one NATS (tests)
  -h, --help`

export interface Args {
  command: 'explain' | 'get' | 'top' | 'help'
  name?: string
  namespace?: string
  allNamespaces: boolean
  output: 'text' | 'json'
  kubeconfig?: string
  context?: string
  natsUrl?: string
  natsContext?: string
  metricsUrl?: string
  instance?: string
  intervalMs: number
  timeoutMs: number
}

export class UsageError extends Error {}

/** 5s, 500ms, 2m, 0; plain numbers are seconds. */
export function parseFlagDuration(flag: string, text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim())
  if (!m) throw new UsageError(`${flag}: "${text}" is not a duration (e.g. 5s, 500ms, 2m)`)
  const n = Number(m[1])
  return Math.round(m[2] === 'ms' ? n : m[2] === 'm' ? n * 60_000 : n * 1000)
}

export function parseArgs(argv: string[]): Args {
  const args: Args = { command: 'help', allNamespaces: false, output: 'text', intervalMs: 5000, timeoutMs: 5000 }
  const positional: string[] = []
  for (let i = 0; i < argv.length; i++) {
    const raw = argv[i] as string
    const eq = raw.startsWith('--') ? raw.indexOf('=') : -1
    const flag = eq > 0 ? raw.slice(0, eq) : raw
    const value = () => {
      if (eq > 0) return raw.slice(eq + 1)
      const v = argv[++i]
      if (v === undefined) throw new UsageError(`${flag} needs a value`)
      return v
    }
    // kubectl style: -nNS and -ojson
    if (/^-[no].+/.test(raw) && !raw.startsWith('--')) {
      argv.splice(i + 1, 0, raw.slice(2))
      if (raw[1] === 'n') args.namespace = value()
      else args.output = output(value())
      continue
    }
    switch (flag) {
      case '-n':
      case '--namespace':
        args.namespace = value()
        break
      case '-A':
      case '--all-namespaces':
        args.allNamespaces = true
        break
      case '-o':
      case '--output':
        args.output = output(value())
        break
      case '--kubeconfig':
        args.kubeconfig = value()
        break
      case '--context':
        args.context = value()
        break
      case '--nats-url':
      case '--server':
        args.natsUrl = value()
        break
      case '--nats-context':
        args.natsContext = value()
        break
      case '--instance':
        args.instance = value()
        break
      case '--metrics-url':
        args.metricsUrl = value()
        break
      case '--interval':
        args.intervalMs = parseFlagDuration(flag, value())
        break
      case '--timeout':
      case '--request-timeout':
        args.timeoutMs = parseFlagDuration(flag, value())
        if (args.timeoutMs <= 0) throw new UsageError(`${flag} must be more than 0`)
        break
      case '-h':
      case '--help':
        return { ...args, command: 'help' }
      default:
        if (raw.startsWith('-') && raw !== '-') throw new UsageError(`unknown flag ${raw}`)
        positional.push(raw)
    }
  }
  const [command, name, ...extra] = positional
  if (!command) return args
  if (command === 'explain') {
    if (!name) throw new UsageError('explain needs the ModelBackfill name: kubectl mbf explain NAME [-n NS]')
    args.command = 'explain'
  } else if (command === 'get' || command === 'status' || command === 'ls' || command === 'list') {
    args.command = 'get'
  } else if (command === 'top') {
    args.command = 'top'
    if (name) throw new UsageError('top takes no name')
  } else if (command === 'help') {
    return args
  } else {
    throw new UsageError(`unknown command "${command}" (explain, get, status, top)`)
  }
  if (extra.length) throw new UsageError(`unexpected argument "${extra[0]}"`)
  args.name = name
  return args
}

function output(v: string): 'text' | 'json' {
  if (v === 'json' || v === 'text' || v === 'wide') return v === 'json' ? 'json' : 'text'
  throw new UsageError(`-o ${v}: use text or json`)
}

// A seed-search worker's entry (test/sim/parallel.ts): plain JavaScript that registers tsx first, because Node 20
// does not run a worker's --import before its own entry module resolves.
import { register } from 'tsx/esm/api'

register()
await import('./parallel.ts')

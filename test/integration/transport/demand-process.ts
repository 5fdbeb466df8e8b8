// One demand instance in a process of its own (demand-batch-ack.test.ts kills it with SIGKILL mid-batch):
// `node --import tsx demand-process.ts <nats url>`. Prints "ready" once it pulls; no Kubernetes needed.
import { KubeConfig } from '@kubernetes/client-node'
import { startRunner } from '../../../cmd/manager/runner.js'

const kc = new KubeConfig()
kc.loadFromClusterAndUser({ name: 'none', server: 'https://127.0.0.1:1', skipTLSVerify: false }, { name: 'none' })
const runner = await startRunner({ natsUrl: process.argv[2] as string, kubeconfig: kc, functions: ['demand'] })
process.stdout.write('ready\n')
process.once('SIGTERM', () => void runner.stop().then(() => process.exit(0)))

// clients/go's go test suite: the shared conformance scenarios and bounded memory with NATS down at start.
import { clientSuite } from './suites.js'

clientSuite('go', 'go', ['test', '-count=1', './...'], 'clients/go', 300_000)

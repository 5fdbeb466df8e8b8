// clients/python's pytest suite: the shared conformance scenarios, the threaded entry point, bounded memory with
// NATS down at start, and the LiteLLM callback in the real LiteLLM proxy.
import { clientSuite, venvPython } from './suites.js'

clientSuite('python', venvPython, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'], 'clients/python', 480_000)

// Prints why the test servers must be (re)built, or nothing when the cached ones are usable (dev/scripts/setup.sh).
import { staleReason } from '../../test/env/binaries.js'

process.stdout.write(staleReason() ?? '')

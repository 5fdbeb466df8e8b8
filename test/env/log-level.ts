// The integration tests' in-process loggers at LOG_LEVEL (vitest.config.ts: warn unless set), as a deployed process
// gets it from its configuration (cmd/manager/main.ts).
import { setLogLevel } from '../../pkg/observability/log.js'

setLogLevel(process.env.LOG_LEVEL ?? 'warn')

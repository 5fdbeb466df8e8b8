export {
  type Credentials,
  gatewayConnectionOptions,
  type NatsServers,
  parseNatsServers,
  readCredentialsFile,
  readNkeySeed,
} from './connection.js'
export {
  EVENT_TYPE,
  encodeForegroundRequest,
  invalidTarget,
  isBackground,
  perModelSubject,
  SUBJECT,
  WORKLOAD_CLASS_ENV,
  WORKLOAD_CLASS_HEADER,
} from './contract.js'
export * from './emitter.js'
export * from './model-map.js'

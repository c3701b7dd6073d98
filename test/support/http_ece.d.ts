/**
 * The part of `http_ece` (the encryption library web-push calls, installed with it) that the
 * tests use as web-push's reference for aes128gcm.
 */
declare module "http_ece" {
  import type { ECDH } from "node:crypto"

  interface Params {
    readonly version: "aes128gcm"
    readonly privateKey: ECDH
    readonly authSecret: string
    readonly dh?: string
    readonly salt?: string
  }
  const ece: {
    readonly encrypt: (buffer: Buffer, params: Params) => Buffer
    readonly decrypt: (buffer: Buffer, params: Params) => Buffer
  }
  export default ece
}

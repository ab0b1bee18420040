{
  "index" : {
    "sha256" : "2a65db74206bc93edf85f7697ab2d28d56d193b5c1699307e77ed2c87689f754",
    "size" : 1317
  },
  "schemaVersion" : 1,
  "signatures" : [
    {
      "algorithm" : "ed25519",
      "keyId" : "6efc567336979a27",
      "signature" : "6Rz1uh7eqwDyo4KbRUvYuzmlAmdUwpfPEXwaUvneSOUnsaEYLEP5dA2N/T2fI7GcQ791k4hS9wgMC8mWXJr/Dg=="
    }
  ]
}

{
  "index" : {
    "sha256" : "df6dada937bbde34d3a0517384117be22055791af8fba0021b94846c1992d9ce",
    "size" : 3351
  },
  "root" : {
    "sha256" : "2a65db74206bc93edf85f7697ab2d28d56d193b5c1699307e77ed2c87689f754",
    "size" : 1317,
    "version" : 3
  },
  "schemaVersion" : 1,
  "signatures" : [
    {
      "algorithm" : "ed25519",
      "keyId" : "dfadf677993b7e2b",
      "signature" : "k579RGvYDghVgS1xbeyP85xCaOp5t/ctovEUVDjU9Pnwqz4Eanwug3t+hI/QPwzwKlBykJ69uM63jiNwhKI8Aw=="
    }
  ]
}

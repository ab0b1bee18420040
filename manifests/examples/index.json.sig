{
  "schemaVersion" : 1,
  "signatures" : [
    {
      "algorithm" : "ed25519",
      "keyId" : "9151dd5d6afed38c",
      "signature" : "qcjEuE9lfVEXIrf/xq/EIl/eVcjXgrwu2aP6Lez9jXWMeLdiWJ9T2vNFeDTl1kw4v6i8zpstPXron6nsAtJ9CA=="
    }
  ]
}

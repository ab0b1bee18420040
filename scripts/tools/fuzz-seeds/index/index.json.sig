{
  "index" : {
    "sha256" : "babfd2ace0fa3bc1e1c6e7469a30e4a8d3bb023880631f35f9d1d7922e76f883",
    "size" : 1964
  },
  "schemaVersion" : 1,
  "signatures" : [
    {
      "algorithm" : "ed25519",
      "keyId" : "9151dd5d6afed38c",
      "signature" : "qcjEuE9lfVEXIrf/xq/EIl/eVcjXgrwu2aP6Lez9jXWMeLdiWJ9T2vNFeDTl1kw4v6i8zpstPXron6nsAtJ9CA=="
    }
  ]
}

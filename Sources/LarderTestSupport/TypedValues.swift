import LarderCore

// The library takes typed ids and versions; a test writes them as text, read here once (a bad
// one fails the test with a `TestSupportError`, no force unwrap).

/// The package id `text` spells.
package func packageID(_ text: String) throws -> PackageID {
    guard let id = PackageID(text) else { throw TestSupportError("\(text.debugDescription) is not a package id") }
    return id
}

/// The version `text` spells.
package func semanticVersion(_ text: String) throws -> SemanticVersion {
    guard let v = SemanticVersion(text) else { throw TestSupportError("\(text.debugDescription) is not a version") }
    return v
}

import Foundation

/// An immutable hash table keyed by byte strings, probed with bytes borrowed from the caller (a
/// slice of a URL), so that a lookup makes no `String` and allocates nothing.
///
/// Open addressing with linear probing, at most half full. The hash is a fast unkeyed one: the
/// keys are the table's own (route hosts, route segments, a package's file paths, all from the
/// signed index and file lists), so a probe's cost is bounded by the clusters those keys make,
/// whatever bytes the probe holds. A class, so that a lookup borrows its arrays rather than
/// retaining each.
final class ByteTable<Value: Sendable>: Sendable {
    /// Slot → entry index + 1 (0 for an empty slot); a power of two long.
    private let slots: [Int32]
    /// Where each entry's key starts in `keys`, and one more: key `i` is `keys[starts[i]..<starts[i + 1]]`.
    private let starts: [Int]
    /// Every key's bytes, one after the other.
    private let keys: [UInt8]
    /// The entries' values, in the order given.
    private let values: [Value]

    /// A table of `entries`; of entries with equal keys, the first wins.
    init(_ entries: [(key: [UInt8], value: Value)]) {
        var capacity = 2
        while capacity < entries.count * 2 { capacity *= 2 }
        var slots = [Int32](repeating: 0, count: capacity)
        var starts: [Int] = [0]
        var keys: [UInt8] = []
        var values: [Value] = []
        for (key, value) in entries {
            let (found, slot) = key.withUnsafeBytes { Self.probe(slots, starts, keys, $0) }
            guard found == nil else { continue }
            values.append(value)
            slots[slot] = Int32(values.count)
            keys.append(contentsOf: key)
            starts.append(keys.count)
        }
        self.slots = slots
        self.starts = starts
        self.keys = keys
        self.values = values
    }

    /// How many entries the table holds.
    var count: Int { values.count }

    /// The value stored under the bytes of `key`, or nil.
    func value(_ key: UnsafeRawBufferPointer) -> Value? {
        Self.probe(slots, starts, keys, key).entry.map { values[$0] }
    }

    /// The entry whose key equals `key`, or nil and the empty slot where the probe ended.
    private static func probe(_ slots: [Int32], _ starts: [Int], _ keys: [UInt8], _ key: UnsafeRawBufferPointer)
        -> (entry: Int?, slot: Int)
    {
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: hash(key)) & mask
        while true {
            let entry = Int(slots[slot]) - 1
            if entry < 0 { return (nil, slot) }
            if equal(keys, starts[entry], starts[entry + 1], key) { return (entry, slot) }
            slot = (slot + 1) & mask
        }
    }

    /// Whether `keys[start..<end]` holds the bytes of `key`.
    private static func equal(_ keys: [UInt8], _ start: Int, _ end: Int, _ key: UnsafeRawBufferPointer) -> Bool {
        guard end - start == key.count else { return false }
        guard let probe = key.baseAddress, start < end else { return true }
        return keys.withUnsafeBytes { stored in
            guard let base = stored.baseAddress else { return false }
            return memcmp(base + start, probe, key.count) == 0
        }
    }

    /// A hash of the bytes of `key`, eight at a time.
    static func hash(_ key: UnsafeRawBufferPointer) -> UInt64 {
        let n = key.count
        var h = 0x9E37_79B9_7F4A_7C15 &* UInt64(truncatingIfNeeded: n &+ 1)
        guard let p = key.baseAddress, n > 0 else { return h ^ (h >> 32) }
        var i = 0
        while i &+ 8 <= n {
            h = mix(h, p.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            i &+= 8
        }
        if i < n {
            var tail: UInt64 = 0
            var shift: UInt64 = 0
            while i < n {
                tail |= UInt64(p.load(fromByteOffset: i, as: UInt8.self)) << shift
                shift &+= 8
                i &+= 1
            }
            h = mix(h, tail)
        }
        return h ^ (h >> 32)
    }

    /// One word folded into the hash (a multiply and an xor-shift).
    private static func mix(_ h: UInt64, _ word: UInt64) -> UInt64 {
        let x = (h ^ word) &* 0xBF58_476D_1CE4_E5B9
        return x ^ (x >> 29)
    }
}

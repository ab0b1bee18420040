import Foundation
import LarderCore
import Testing

@Suite("Core: duplicate keys in JSON")
struct DuplicateKeysTests {
    func first(_ text: String) -> (key: String, path: String)? { DuplicateKeys.first(in: Data(text.utf8)) }

    @Test("a key twice in one object is found, with where its object is")
    func found() {
        #expect(first(#"{"a": 1, "a": 2}"#)! == ("a", "/"))
        #expect(first(#"{"p": [{"id": "x"}, {"id": "y", "v": 1, "id": "z"}]}"#)! == ("id", "/p/1"))
        #expect(first(#"{"o": {"deep": {"k": 1, "k": 1}}}"#)! == ("k", "/o/deep"))
    }

    @Test("escapes are decoded before keys are compared")
    func escapes() {
        #expect(first(#"{"a": 1, "\u0061": 2}"#)?.key == "a")
        #expect(first(#"{"\"q\"": 1, "\u0022q\u0022": 2}"#)?.key == "\"q\"")
        #expect(first(#"{"\ud83d\ude00": 1, "😀": 2}"#)?.key == "😀")
    }

    @Test("the same key in different objects, keys inside strings, and values are not duplicates")
    func notDuplicates() {
        #expect(first(#"{"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]}"#) == nil)
        #expect(first(#"{"a": "x\", \"a\": \"y", "b": "{\"b\": 1}"}"#) == nil)
        #expect(first(#"{"a": "a", "b": ["a", "a"], "c": {"d": "a"}}"#) == nil)
        #expect(first(#"[{"a": 1}, {"a": 1}]"#) == nil)
    }

    @Test("text that is not JSON, or ends inside a string, gives no answer (the decoder reports it)")
    func notJSON() {
        #expect(first(#"{"a": 1, "a"#) == nil)
        #expect(first("") == nil)
        #expect(first("}}]]") == nil)
    }
}

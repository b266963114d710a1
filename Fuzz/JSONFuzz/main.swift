/// libFuzzer entry point for the JSON reader and writer: every input goes through
/// `JSONFuzzCheck.violation(in:)`, whose properties docs/testing.md lists.
/// Built and run by `make fuzz-json` (or `make fuzz`).
import RoostJSON

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    if let problem = JSONFuzzCheck.violation(in: Array(UnsafeBufferPointer(start: data, count: size))) {
        // fatalError keeps its message in -O builds; precondition's would be dropped.
        fatalError("the JSON reader and writer: property broken: \(problem)")
    }
    return 0
}

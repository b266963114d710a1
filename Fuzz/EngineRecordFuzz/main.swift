/// libFuzzer entry point for the engine record decoder and replay: every input goes through
/// `EngineRecordFuzzCheck.violation(in:)`, whose properties docs/testing.md lists.
/// Built and run by `make fuzz-engine` (or `make fuzz`).
import RoostEngine

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    if let problem = EngineRecordFuzzCheck.violation(in: Array(UnsafeBufferPointer(start: data, count: size))) {
        // fatalError keeps its message in -O builds; precondition's would be dropped.
        fatalError("the engine record decoder and replay: property broken: \(problem)")
    }
    return 0
}

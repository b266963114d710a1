/// libFuzzer entry point for the NDJSON device import (reader and line parser): every input
/// goes through `NDJSONImportFuzzCheck.violation(in:)`, whose properties docs/testing.md lists.
/// Built and run by `make fuzz-ndjson` (or `make fuzz`).
import RoostAPI

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    if let problem = NDJSONImportFuzzCheck.violation(in: Array(UnsafeBufferPointer(start: data, count: size))) {
        // fatalError keeps its message in -O builds; precondition's would be dropped.
        fatalError("the NDJSON import: property broken: \(problem)")
    }
    return 0
}

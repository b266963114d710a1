/// libFuzzer entry point for the CSV reader of the device import: every input goes through
/// `CSVReaderFuzzCheck.violation(in:)`, whose properties docs/testing.md lists.
/// Built and run by `make fuzz-csv` (or `make fuzz`).
import RoostAPI

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    if let problem = CSVReaderFuzzCheck.violation(in: Array(UnsafeBufferPointer(start: data, count: size))) {
        // fatalError keeps its message in -O builds; precondition's would be dropped.
        fatalError("the CSV reader of the device import: property broken: \(problem)")
    }
    return 0
}

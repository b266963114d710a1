/// libFuzzer entry point for the WAL segment, checkpoint and snapshot readers: every input goes through
/// `StorageFuzzCheck.violation(in:)`, whose properties docs/testing.md lists.
/// Built and run by `make fuzz-storage` (or `make fuzz`).
import RoostStorage

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    if let problem = StorageFuzzCheck.violation(in: Array(UnsafeBufferPointer(start: data, count: size))) {
        // fatalError keeps its message in -O builds; precondition's would be dropped.
        fatalError("the WAL segment, checkpoint and snapshot readers: property broken: \(problem)")
    }
    return 0
}

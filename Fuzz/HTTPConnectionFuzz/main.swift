/// libFuzzer entry point for the HTTP connection machine: every input goes through
/// `HTTPConnectionFuzzCheck.violation(in:)`, whose properties docs/testing.md lists.
/// Built and run by `make fuzz-connection` (or `make fuzz`).
import RoostHTTP

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    if let problem = HTTPConnectionFuzzCheck.violation(in: Array(UnsafeBufferPointer(start: data, count: size))) {
        // fatalError keeps its message in -O builds; precondition's would be dropped.
        fatalError("the HTTP connection machine: property broken: \(problem)")
    }
    return 0
}

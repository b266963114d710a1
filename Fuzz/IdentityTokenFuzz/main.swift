/// libFuzzer entry point for the identity-token parser: every input goes through
/// `IdentityTokenFuzzCheck.violation(in:)`, whose properties docs/testing.md lists.
/// Built and run by `make fuzz-identity` (or `make fuzz`).
import RoostAPI

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    if let problem = IdentityTokenFuzzCheck.violation(in: Array(UnsafeBufferPointer(start: data, count: size))) {
        // fatalError keeps its message in -O builds; precondition's would be dropped.
        fatalError("the identity-token parser: property broken: \(problem)")
    }
    return 0
}

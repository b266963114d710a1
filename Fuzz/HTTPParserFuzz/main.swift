/// libFuzzer entry point for the HTTP/1.1 request parser: arbitrary bytes,
/// arbitrary splits (the first byte seeds them), invariants from
/// `HTTPParserFuzzCheck`. Built by `make fuzz-http` together with the parser's
/// sources (no RoostPlatform needed); see docs/http.md.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    if let problem = HTTPParserFuzzCheck.violation(in: input) {
        // fatalError keeps its message in -O builds; precondition's would be dropped.
        fatalError("HTTP parser invariant broken: \(problem)")
    }
    return 0
}

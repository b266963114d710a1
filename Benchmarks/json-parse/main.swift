// Times JSONReader.parse and JSONWriter.value on a 265-byte registration body.
// Not a SwiftPM target: it is compiled together with the RoostJSON sources, see docs/json.md.

let body = Array(
    (#"{"token":"7f1c0a5be0b94d52a1f3c1d2e3f40516273849a0b1c2d3e4f5061728394a5b6c","platform":"apns","#
        + #""appID":"com.example.news","tags":["breaking","sport","weather"],"locale":"fr-FR","#
        + #""timezone":"Europe/Paris","badge":3,"sandbox":false,"userID":null,"createdAt":1764430275}"#).utf8)
let iterations = 200_000
let clock = ContinuousClock()
var sink = 0

/// Returns nanoseconds per iteration of `body`.
func measure(_ body: () -> Int) -> Double {
    let start = clock.now
    for _ in 0..<iterations {
        sink &+= body()
    }
    let elapsed = clock.now - start
    let nanoseconds = Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
    return nanoseconds / Double(iterations)
}

func parseOnce() -> JSONValue {
    do {
        return try JSONReader.parse(body)
    } catch {
        fatalError("benchmark body does not parse: \(error)")
    }
}

print("body bytes: \(body.count)")
for round in 0..<5 {
    let parse = measure { parseOnce().objectMembers?.count ?? 0 }
    print("round \(round): parse \(Int(parse)) ns")
}
let value = parseOnce()
let write = measure {
    var writer = JSONWriter(reservingCapacity: 512)
    writer.value(value)
    return writer.bytes.count
}
print("write \(Int(write)) ns")
print("(sink \(sink))")

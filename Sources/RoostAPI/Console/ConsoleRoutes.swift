import RoostCrypto
import RoostHTTP

/// One file of the web console as the server sends it: the bytes, their
/// gzip variant (made at build time by scripts/console-assets.py), and a
/// strong ETag per variant from SHA-256 of the plain bytes, all computed once.
package struct ConsoleAsset: Sendable {
    /// The name under `/console/` (`app.js`); `index.html` is also `/console`.
    package let name: String
    package let contentType: String
    package let plain: [UInt8]
    package let gzip: [UInt8]
    /// `"<first 16 hex digits of SHA-256(plain)>"`, quotes included.
    package let plainETag: String
    /// The gzip variant's own strong ETag: a strong validator names one
    /// representation, and the two variants differ byte for byte.
    package let gzipETag: String

    init(_ generated: GeneratedConsoleAsset) {
        name = generated.name
        contentType = generated.contentType
        plain = Array(generated.text.utf8)
        guard let gzip = Base64.decode(generated.gzipBase64) else {
            preconditionFailure("console asset \(generated.name): its gzip variant is not base64")
        }
        precondition(gzip.count >= 18 && gzip[0] == 0x1f && gzip[1] == 0x8b, "console asset \(name): not gzip")
        self.gzip = gzip
        let digest = Crypto.sha256(plain).prefix(8).map { byte -> String in
            let hex = String(byte, radix: 16)
            return hex.count == 1 ? "0" + hex : hex
        }.joined()
        plainETag = "\"" + digest + "\""
        gzipETag = "\"" + digest + "-gzip\""
    }
}

/// The asset as the generator wrote it (ConsoleAssets+Generated.swift).
struct GeneratedConsoleAsset {
    var name: String
    var contentType: String
    var text: String
    var gzipBase64: String
}

/// `GET /console` and `GET /console/{asset}` (docs/console.md): the web
/// console, served from bytes embedded in the binary, no credential (the
/// console's own API calls carry the key the user typed). Every answer
/// carries a strict Content-Security-Policy (scripts, styles and fetches
/// only from this origin, nothing inline, no frames), `nosniff` and
/// `no-referrer`; `If-None-Match` gets 304; `Accept-Encoding: gzip` gets the
/// gzip variant.
package struct ConsoleRoutes: Sendable {
    /// Every asset by name, built once per process (decoding and hashing
    /// ~100 KB: well under a millisecond).
    package static let assets: [String: ConsoleAsset] = {
        var byName: [String: ConsoleAsset] = [:]
        for generated in ConsoleAssets.generated {
            precondition(byName[generated.name] == nil, "console asset \(generated.name) twice")
            byName[generated.name] = ConsoleAsset(generated)
        }
        precondition(byName["index.html"] != nil, "the console has no index.html")
        return byName
    }()

    /// The policy every console answer carries. `connect-src 'self'`: the
    /// console talks to this server's public API only; no inline script or
    /// style, so an injected string can never run.
    package static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    package var routes: [Route] {
        [
            Route(.get, "/console", access: .open) { (context) throws(APIError) -> HTTPResponse in
                try Self.answer("index.html", context.request.head)
            },
            Route(.get, "/console/{asset}", access: .open) { (context) throws(APIError) -> HTTPResponse in
                try Self.answer(context.parameters[0], context.request.head)
            },
        ]
    }

    /// Returns the asset's answer: 200 with the variant the client accepts,
    /// 304 when `If-None-Match` names it, 404 for a name not embedded.
    static func answer(_ name: String, _ head: HTTPRequestHead) throws(APIError) -> HTTPResponse {
        guard let asset = assets[name] else { throw APIError.notFound("console asset") }
        let gzip = acceptsGzip(head.headers["Accept-Encoding"])
        let etag = gzip ? asset.gzipETag : asset.plainETag
        var headers: [(name: String, value: String)] = [
            ("Content-Type", asset.contentType),
            ("Content-Security-Policy", contentSecurityPolicy),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),
            // Revalidated on every use: the names carry no version, and a 304 is cheap.
            ("Cache-Control", "no-cache"),
            ("Vary", "Accept-Encoding"),
            ("ETag", etag),
        ]
        if let condition = head.headers["If-None-Match"],
            matches(condition, asset.plainETag) || matches(condition, asset.gzipETag)
        {
            return HTTPResponse(status: 304, headers: headers)
        }
        if gzip { headers.append(("Content-Encoding", "gzip")) }
        return HTTPResponse(status: 200, headers: headers, body: gzip ? asset.gzip : asset.plain)
    }

    /// Returns whether an `If-None-Match` value names `etag` (or is `*`).
    /// Weak comparison, as RFC 9110 §13.1.2 asks for this field.
    static func matches(_ condition: String, _ etag: String) -> Bool {
        for candidate in condition.split(separator: ",") {
            var tag = candidate.drop { $0 == " " || $0 == "\t" }
            while tag.last == " " || tag.last == "\t" { tag = tag.dropLast() }
            if tag == "*" { return true }
            if tag.hasPrefix("W/") { tag = tag.dropFirst(2) }
            if tag == etag { return true }
        }
        return false
    }

    /// Returns whether `Accept-Encoding` admits gzip: named (or `*`) with a
    /// q-value above zero. Absent → identity only.
    static func acceptsGzip(_ field: String?) -> Bool {
        guard let field else { return false }
        var star = false
        for item in field.split(separator: ",") {
            let parts = item.split(separator: ";")
            guard let first = parts.first else { continue }
            let coding = first.trimmingSpaces().lowercased()
            var quality = 1.0
            for parameter in parts.dropFirst() {
                let pair = parameter.trimmingSpaces()
                if pair.lowercased().hasPrefix("q=") { quality = Double(pair.dropFirst(2)) ?? 0 }
            }
            if coding == "gzip" || coding == "x-gzip" { return quality > 0 }
            if coding == "*" { star = quality > 0 }
        }
        return star
    }
}

extension Substring {
    fileprivate func trimmingSpaces() -> Substring {
        var text = drop { $0 == " " || $0 == "\t" }
        while text.last == " " || text.last == "\t" { text = text.dropLast() }
        return text
    }
}

/// Standard base64 (RFC 4648 §4) for the embedded gzip variants; whitespace
/// between groups is skipped (the generator wraps lines).
enum Base64 {
    /// Returns the decoded bytes, or nil for a character outside the
    /// alphabet or a length that is not whole groups. O(n).
    static func decode(_ text: String) -> [UInt8]? {
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count * 3 / 4)
        var group: UInt32 = 0
        var count = 0
        var padding = 0
        for byte in text.utf8 {
            let value: UInt32
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = UInt32(byte - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = UInt32(byte - UInt8(ascii: "a")) + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = UInt32(byte - UInt8(ascii: "0")) + 52
            case UInt8(ascii: "+"): value = 62
            case UInt8(ascii: "/"): value = 63
            case UInt8(ascii: "="):
                padding += 1
                value = 0
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): continue
            default: return nil
            }
            if padding > 0 && byte != UInt8(ascii: "=") { return nil }
            group = group << 6 | value
            count += 1
            if count == 4 {
                output.append(UInt8(truncatingIfNeeded: group >> 16))
                output.append(UInt8(truncatingIfNeeded: group >> 8))
                output.append(UInt8(truncatingIfNeeded: group))
                group = 0
                count = 0
            }
        }
        guard count == 0, padding <= 2 else { return nil }
        output.removeLast(padding)
        return output
    }
}

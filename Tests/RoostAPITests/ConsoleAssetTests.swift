import Glibc
import RoostHTTP
import RoostPlatform
import Testing

@testable import RoostAPI

/// `GET /console` and its assets (docs/console.md, decision 0068): the
/// embedded bytes are the repository's files, every answer carries the
/// security headers, ETags give 304, gzip where accepted, 404 otherwise.
@Suite("web console assets")
struct ConsoleAssetTests {
    /// The package root, three levels above this file.
    static let packageRoot: String = {
        var path = #filePath
        for _ in 0..<3 { path = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]) }
        return path
    }()

    static let assetDirectory = packageRoot + "/Sources/RoostAPI/Console/Assets"

    /// The names of the files in the assets folder, sorted.
    static func filesOnDisk() throws -> [String] {
        guard let directory = opendir(assetDirectory) else {
            throw HarnessError(message: "cannot open \(assetDirectory)")
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if !name.hasPrefix(".") { names.append(name) }
        }
        return names.sorted()
    }

    @Test("the embedded assets are byte for byte the files in Console/Assets (else: make console-assets)")
    func embeddedMatchTheFiles() throws {
        let names = try Self.filesOnDisk()
        #expect(names == ConsoleAssets.generated.map(\.name), "run `make console-assets`")
        for name in names {
            let bytes = try #require(
                try DurableFile.readIfExists(path: Self.assetDirectory + "/" + name, limitBytes: 1 << 20))
            let asset = try #require(ConsoleRoutes.assets[name])
            #expect(asset.plain == bytes, "\(name) differs from its file: run `make console-assets`")
        }
    }

    @Test("each gzip variant's trailer holds the CRC-32 and length of the plain bytes")
    func gzipVariantsMatch() throws {
        for asset in ConsoleRoutes.assets.values {
            let gzip = asset.gzip
            #expect(gzip[0] == 0x1f && gzip[1] == 0x8b && gzip[2] == 8, "\(asset.name): not a deflate gzip member")
            let trailer = Array(gzip.suffix(8))
            let crc = trailer[0..<4].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            let size = trailer[4..<8].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            #expect(crc == Self.crc32(asset.plain), "\(asset.name): gzip of other bytes: run `make console-assets`")
            #expect(Int(size) == asset.plain.count, "\(asset.name)")
            #expect(asset.gzip.count < asset.plain.count, "\(asset.name): gzip is not smaller")
        }
    }

    @Test("GET /console: the page with a strict CSP, nosniff, no-referrer and a strong ETag, without a key")
    func indexHeaders() async throws {
        let answer = try await Harness().call(.get, "/console")
        #expect(answer.status == 200)
        #expect(answer.header("Content-Type") == "text/html; charset=utf-8")
        let policy = try #require(answer.header("Content-Security-Policy"))
        #expect(policy == ConsoleRoutes.contentSecurityPolicy)
        for directive in [
            "default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            #expect(policy.contains(directive), "\(directive)")
        }
        #expect(!policy.contains("unsafe"))
        #expect(answer.header("X-Content-Type-Options") == "nosniff")
        #expect(answer.header("Referrer-Policy") == "no-referrer")
        let etag = try #require(answer.header("ETag"))
        #expect(etag.hasPrefix("\"") && etag.hasSuffix("\"") && !etag.hasPrefix("W/"))
        #expect(answer.header("Content-Encoding") == nil)
        #expect(answer.body == ConsoleRoutes.assets["index.html"]?.plain)
        #expect(String(decoding: answer.body, as: UTF8.self).contains("<label for=\"api-key\">API key</label>"))
    }

    @Test(
        "each asset is served with its type and the same headers",
        arguments: [
            ("app.js", "text/javascript; charset=utf-8"), ("api.js", "text/javascript; charset=utf-8"),
            ("views.js", "text/javascript; charset=utf-8"), ("ui.js", "text/javascript; charset=utf-8"),
            ("console.css", "text/css; charset=utf-8"), ("index.html", "text/html; charset=utf-8"),
        ])
    func assetTypes(name: String, type: String) async throws {
        let answer = try await Harness().call(.get, "/console/" + name)
        #expect(answer.status == 200)
        #expect(answer.header("Content-Type") == type)
        #expect(answer.header("Content-Security-Policy") == ConsoleRoutes.contentSecurityPolicy)
        #expect(answer.header("X-Content-Type-Options") == "nosniff")
        #expect(answer.body == ConsoleRoutes.assets[name]?.plain)
    }

    @Test("If-None-Match naming the ETag (alone, in a list, weak or *) → 304 without a body; another → 200")
    func notModified() async throws {
        let harness = try Harness()
        let first = await harness.call(.get, "/console/app.js")
        let etag = try #require(first.header("ETag"))
        for condition in [etag, "\"other\", \(etag)", "W/\(etag)", "*"] {
            let again = await harness.call(
                .get, "/console/app.js", key: nil, body: nil, peer: nil, headers: [("If-None-Match", condition)])
            #expect(again.status == 304, "\(condition)")
            #expect(again.body.isEmpty)
            #expect(again.header("ETag") == etag)
            #expect(again.header("Content-Security-Policy") != nil)
        }
        let changed = await harness.call(
            .get, "/console/app.js", key: nil, body: nil, peer: nil, headers: [("If-None-Match", "\"0000\"")])
        #expect(changed.status == 200)
        #expect(changed.body == first.body)
    }

    @Test("Accept-Encoding with gzip → the gzip variant with its own ETag; q=0 or none → the plain bytes")
    func compression() async throws {
        let harness = try Harness()
        let asset = try #require(ConsoleRoutes.assets["views.js"])
        for accept in ["gzip", "gzip, deflate, br", "br;q=1.0, gzip;q=0.5", "*", "identity, *;q=0.1"] {
            let answer = await harness.call(
                .get, "/console/views.js", key: nil, body: nil, peer: nil, headers: [("Accept-Encoding", accept)])
            #expect(answer.status == 200)
            #expect(answer.header("Content-Encoding") == "gzip", "\(accept)")
            #expect(answer.header("Vary") == "Accept-Encoding")
            #expect(answer.body == asset.gzip)
            #expect(answer.header("ETag") == asset.gzipETag)
            let revalidated = await harness.call(
                .get, "/console/views.js", key: nil, body: nil, peer: nil,
                headers: [("Accept-Encoding", accept), ("If-None-Match", asset.gzipETag)])
            #expect(revalidated.status == 304)
        }
        for accept in ["gzip;q=0", "deflate, br", "identity", "*;q=0"] {
            let answer = await harness.call(
                .get, "/console/views.js", key: nil, body: nil, peer: nil, headers: [("Accept-Encoding", accept)])
            #expect(answer.header("Content-Encoding") == nil, "\(accept)")
            #expect(answer.body == asset.plain)
            #expect(answer.header("ETag") == asset.plainETag)
        }
        #expect(asset.plainETag != asset.gzipETag)
    }

    @Test("an asset that is not embedded → 404 not_found; /console/ and a nested path too")
    func unknownAsset() async throws {
        let harness = try Harness()
        for target in ["/console/nope.js", "/console/", "/console/../Package.swift", "/console/a/b", "/console/APP.JS"]
        {
            let answer = await harness.call(.get, target)
            #expect(answer.status == 404, "\(target)")
            #expect(answer.errorCode == "not_found", "\(target)")
        }
        #expect(await harness.call(.post, "/console").status == 405)
    }

    @Test("the page holds no inline script or style, and the scripts touch no storage, cookie or innerHTML")
    func nothingInline() throws {
        for asset in ConsoleRoutes.assets.values {
            let text = String(decoding: asset.plain, as: UTF8.self)
            switch asset.contentType {
            case "text/html; charset=utf-8":
                #expect(!text.contains("<style"), "\(asset.name)")
                #expect(!text.contains("style="), "\(asset.name)")
                for handler in ["onclick=", "onload=", "onsubmit=", "onerror=", "javascript:"] {
                    #expect(!text.contains(handler), "\(asset.name): an inline event handler")
                }
                for script in text.split(separator: "<script").dropFirst() {
                    #expect(script.hasPrefix(" type=\"module\" src=\"/console/"), "\(asset.name): inline script")
                }
                #expect(!text.contains("http://") && !text.contains("https://"), "\(asset.name): an outside address")
            case "text/javascript; charset=utf-8":
                for forbidden in ["localStorage", "sessionStorage", "document.cookie", "innerHTML", "eval(", "://"] {
                    let uses = text.split(separator: "\n").filter {
                        $0.contains(forbidden) && !$0.trimmingPrefix(while: { $0 == " " }).hasPrefix("//")
                            && !$0.contains("http://www.w3.org/2000/svg")
                    }
                    #expect(uses.isEmpty, "\(asset.name) uses \(forbidden): \(uses)")
                }
            default:
                #expect(!text.contains("@import") && !text.contains("url("), "\(asset.name) fetches from elsewhere")
            }
        }
    }

    @Test("base64 decoding: RFC 4648 vectors, wrapped lines, and refusals")
    func base64() {
        let vectors = [
            ("", ""), ("Zg==", "f"), ("Zm8=", "fo"), ("Zm9v", "foo"), ("Zm9vYg==", "foob"), ("Zm9vYmE=", "fooba"),
            ("Zm9vYmFy", "foobar"), ("Zm9v\nYmFy\n", "foobar"),
        ]
        for (encoded, plain) in vectors {
            #expect(Base64.decode(encoded) == Array(plain.utf8), "\(encoded)")
        }
        for bad in ["Zm9", "Zm=v", "Zm9v!", "Z===", "Zg==Zg=="] {
            #expect(Base64.decode(bad) == nil, "\(bad)")
        }
    }

    /// CRC-32 (IEEE 802.3, reflected), as gzip's trailer holds it. O(n), bitwise.
    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }
}

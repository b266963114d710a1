import CCrypto
import CSystemShims
import CZstd
import Testing

@Suite("System libraries")
struct SystemLibraryTests {
    @Test("zstd compresses and decompresses a buffer back to itself")
    func zstdRoundTrip() throws {
        let input = [UInt8]((0..<10_000).map { UInt8(truncatingIfNeeded: $0 % 97) })
        let bound = ZSTD_compressBound(input.count)
        var compressed = [UInt8](repeating: 0, count: bound)
        let written = compressed.withUnsafeMutableBytes { out in
            input.withUnsafeBytes { ZSTD_compress(out.baseAddress, bound, $0.baseAddress, input.count, 1) }
        }
        #expect(ZSTD_isError(written) == 0)
        #expect(written < input.count)
        var output = [UInt8](repeating: 0, count: input.count)
        let read = output.withUnsafeMutableBytes { out in
            compressed.withUnsafeBytes { ZSTD_decompress(out.baseAddress, input.count, $0.baseAddress, written) }
        }
        #expect(read == input.count)
        #expect(output == input)
    }

    @Test("libcrypto SHA-256 of 'abc' matches the FIPS 180-2 vector")
    func sha256KnownVector() {
        let input = Array("abc".utf8)
        var digest = [UInt8](repeating: 0, count: 32)
        _ = digest.withUnsafeMutableBufferPointer { out in
            input.withUnsafeBufferPointer { SHA256($0.baseAddress, input.count, out.baseAddress) }
        }
        let hex = digest.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }
            .joined()
        #expect(hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test("CRYPTO_memcmp tells equal from different buffers")
    func constantTimeCompare() {
        let a: [UInt8] = [1, 2, 3, 4]
        let b: [UInt8] = [1, 2, 3, 5]
        #expect(a.withUnsafeBytes { x in a.withUnsafeBytes { CRYPTO_memcmp(x.baseAddress, $0.baseAddress, 4) } } == 0)
        #expect(a.withUnsafeBytes { x in b.withUnsafeBytes { CRYPTO_memcmp(x.baseAddress, $0.baseAddress, 4) } } != 0)
    }

    @Test("RAND_bytes fills a buffer with bytes that differ between calls")
    func randomBytes() {
        var first = [UInt8](repeating: 0, count: 32)
        var second = [UInt8](repeating: 0, count: 32)
        #expect(first.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, 32) } == 1)
        #expect(second.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, 32) } == 1)
        #expect(first != second)
    }

    @Test("CRC-32C of '123456789' is the check value 0xE3069283, in one call or split")
    func crc32cCheckValue() {
        let input = Array("123456789".utf8)
        let whole = input.withUnsafeBytes { roost_crc32c(0, $0.baseAddress, 9) }
        #expect(whole == 0xE306_9283)
        let first = input.withUnsafeBytes { roost_crc32c(0, $0.baseAddress, 4) }
        let split = input.withUnsafeBytes { roost_crc32c(first, $0.baseAddress! + 4, 5) }
        #expect(split == 0xE306_9283)
    }
}

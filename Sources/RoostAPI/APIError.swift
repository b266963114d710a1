import RoostHTTP

/// An error answered to a client in the envelope of spec §2.
package struct APIError: Error, Sendable {
    package var status: Int
    package var code: String
    package var message: String
    package var field: String?
}

/// Misuse of a command: an unknown flag, a missing or malformed value. The
/// command prints it with its usage and exits 2.
struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The flags of one subcommand, parsed strictly: every flag must be one the
/// command declares, each at most once; a valued flag needs its value (in the
/// next argument or after `=`); anything that does not start with `--` is a
/// positional argument, accepted only where the command allows them.
/// `--help` is the caller's business (see `wantsHelp`).
struct Arguments {
    /// The most positional arguments any command takes (compare's result files).
    static let positionalMax = 64

    private var values: [String: String] = [:]
    private var switches: Set<String> = []
    private(set) var positional: [String] = []
    /// The flags in the order given (for the record a result file keeps).
    private(set) var given: [String] = []

    /// Returns whether `arguments` ask for help (`--help` or `-h` anywhere).
    static func wantsHelp(_ arguments: ArraySlice<String>) -> Bool {
        arguments.contains("--help") || arguments.contains("-h")
    }

    /// Parses `arguments` against the declared `valued` flags (each takes a
    /// value) and `switches` (none); at most `positionalAllowed` positional
    /// arguments. Throws on anything else.
    init(
        _ arguments: ArraySlice<String>, valued: Set<String>, switches declared: Set<String> = [],
        positionalAllowed: Int = 0
    ) throws(UsageError) {
        precondition(positionalAllowed <= Self.positionalMax, "positionalAllowed \(positionalAllowed) above the max")
        precondition(valued.isDisjoint(with: declared), "a flag is both valued and a switch: \(valued)")
        var rest = arguments
        while let argument = rest.popFirst() {
            guard argument.hasPrefix("--") else {
                guard positional.count < positionalAllowed else {
                    throw UsageError(
                        positionalAllowed == 0
                            ? "unexpected argument '\(argument)' (flags are given by name, e.g. --seconds 10)"
                            : "too many arguments at '\(argument)'")
                }
                positional.append(argument)
                continue
            }
            var name = argument
            var inline: String? = nil
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            guard !given.contains(name) else { throw UsageError("\(name) given twice") }
            if valued.contains(name) {
                guard let value = inline ?? rest.popFirst() else { throw UsageError("\(name) needs a value") }
                guard inline != nil || !value.hasPrefix("--") else {
                    throw UsageError("\(name) needs a value, got the flag \(value)")
                }
                values[name] = value
            } else if declared.contains(name) {
                guard inline == nil else { throw UsageError("\(name) takes no value") }
                switches.insert(name)
            } else {
                throw UsageError("unknown option \(name)")
            }
            given.append(name)
        }
    }

    /// Returns whether the switch `name` was given.
    func has(_ name: String) -> Bool { switches.contains(name) || values[name] != nil }

    /// The raw value of `name`, if given.
    func string(_ name: String) -> String? { values[name] }

    /// The value of `name` as an integer within `range`, if given.
    func int(_ name: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let text = values[name] else { return nil }
        guard let value = Self.integer(text), range.contains(value) else {
            throw UsageError("\(name) \(text): expected an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    /// The value of `name` as a number within `range`, if given.
    func double(_ name: String, in range: ClosedRange<Double>) throws(UsageError) -> Double? {
        guard let text = values[name] else { return nil }
        guard let value = Double(text), value.isFinite, range.contains(value) else {
            throw UsageError("\(name) \(text): expected a number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    /// The value of `name`, which must be one of `choices`, if given.
    func choice(_ name: String, _ choices: [String]) throws(UsageError) -> String? {
        guard let text = values[name] else { return nil }
        guard choices.contains(text) else {
            throw UsageError("\(name) \(text): expected one of \(choices.joined(separator: ", "))")
        }
        return text
    }

    /// A decimal integer, allowing `_` as a digit separator (`1_000_000`).
    static func integer(_ text: String) -> Int? {
        let digits = text.filter { $0 != "_" }
        return digits.isEmpty ? nil : Int(digits)
    }
}

import Glibc

/// Plots written by hand as SVG (no plotting dependency): a run's throughput
/// and latency over time, latency against offered rate, and a bar chart
/// comparing runs.
enum SVGPlot {
    static let width = 900.0
    static let left = 80.0
    static let right = 30.0
    static let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]

    /// Two panels over the run's seconds: answers/s (top), and p50, p99 and
    /// max latency on a log scale (bottom).
    static func timeSeries(_ result: LoadResult) -> String {
        let series = result.series
        let height = 600.0
        var svg = header(height: height)
        let title =
            (result.options.label ?? result.options.shape.dialect.rawValue) + ", \(result.options.modeDescription), "
            + "\(result.options.connections) connections — \(Format.grouped(Int(result.rate.rounded()))) answers/s, "
            + "p99 \(Format.duration(result.report.latency.percentile(99)))"
        svg += text(width / 2, 24, title, size: 15, anchor: "middle", weight: "bold")
        let seconds = max(1.0, Double(series.count))
        let x = { (second: Double) in left + (width - left - right) * second / seconds }

        // Throughput.
        let top = (y0: 50.0, y1: 270.0)
        let rateMax = niceCeiling(series.filter { $0.duration >= 0.5 }.map(\.rate).max() ?? 1)
        svg += axes(top, xMax: seconds, yTicks: linearTicks(rateMax), yLabel: "answers/s", scale: { $0 / rateMax })
        var points = ""
        // A last part-second (the drain) is left out: its rate is a short sample's.
        for (index, second) in series.enumerated() where second.duration >= 0.5 {
            let y = top.y1 - (top.y1 - top.y0) * second.rate / rateMax
            points += "\(Format.fixed(x(Double(index) + 0.5), 1)),\(Format.fixed(y, 1)) "
        }
        svg += "<polyline fill=\"none\" stroke=\"\(colors[0])\" stroke-width=\"2\" points=\"\(points)\"/>\n"
        let failures = series.enumerated().filter { $0.element.unexpected + $0.element.failed > 0 }
        for (index, second) in failures {
            svg += "<circle cx=\"\(Format.fixed(x(Double(index) + 0.5), 1))\" cy=\"\(top.y1 - 4)\" r=\"3\" "
            svg += "fill=\"#d62728\"><title>second \(second.second + 1): \(second.unexpected) unexpected, "
            svg += "\(second.failed) failed</title></circle>\n"
        }

        // Latency, log scale in milliseconds.
        let bottom = (y0: 330.0, y1: 550.0)
        let values = series.flatMap { [$0.p50Nanoseconds, $0.p99Nanoseconds, $0.maxNanoseconds] }.filter { $0 > 0 }
        let low = floor(log10(Double(values.min() ?? 1_000) / 1e6))
        let high = max(low + 1, ceil(log10(Double(values.max() ?? 1_000_000) / 1e6)))
        let logScale = { (milliseconds: Double) in (log10(max(milliseconds, 1e-9)) - low) / (high - low) }
        var ticks: [Double] = []
        var decade = low
        while decade <= high {
            ticks.append(pow(10, decade))
            decade += 1
        }
        svg += axes(bottom, xMax: seconds, yTicks: ticks, yLabel: "latency ms (log)", scale: logScale)
        let lines: [(String, KeyPath<SecondSummary, UInt64>)] = [
            ("p50", \.p50Nanoseconds), ("p99", \.p99Nanoseconds), ("max", \.maxNanoseconds),
        ]
        for (offset, (name, path)) in lines.enumerated() {
            var linePoints = ""
            for (index, second) in series.enumerated() where second[keyPath: path] > 0 {
                let y = bottom.y1 - (bottom.y1 - bottom.y0) * logScale(Double(second[keyPath: path]) / 1e6)
                linePoints += "\(Format.fixed(x(Double(index) + 0.5), 1)),\(Format.fixed(y, 1)) "
            }
            let color = colors[offset + 1]
            svg += "<polyline fill=\"none\" stroke=\"\(color)\" stroke-width=\"1.5\" points=\"\(linePoints)\"/>\n"
            let legendX = width - right - 180 + Double(offset) * 60
            svg += "<rect x=\"\(legendX)\" y=\"\(bottom.y0 - 18)\" width=\"12\" height=\"3\" fill=\"\(color)\"/>\n"
            svg += text(legendX + 16, bottom.y0 - 13, name, size: 12)
        }
        svg += text(width / 2, height - 12, "second of the run", size: 12, anchor: "middle")
        return svg + "</svg>\n"
    }

    /// Latency percentiles (log scale) against the offered rate of each run,
    /// one marker per run, labelled.
    static func latencyAgainstRate(_ runs: [(name: String, offered: Double, p50: Double, p99: Double, max: Double)])
        -> String
    {
        let height = 460.0
        var svg = header(height: height)
        svg += text(
            width / 2, 24, "latency against offered rate (open loop)", size: 15, anchor: "middle", weight: "bold")
        let frame = (y0: 50.0, y1: 400.0)
        let rateMax = niceCeiling(runs.map(\.offered).max() ?? 1)
        let values = runs.flatMap { [$0.p50, $0.p99, $0.max] }.filter { $0 > 0 }
        let low = floor(log10((values.min() ?? 0.1)))
        let high = max(low + 1, ceil(log10(values.max() ?? 1)))
        let logScale = { (milliseconds: Double) in (log10(max(milliseconds, 1e-9)) - low) / (high - low) }
        var ticks: [Double] = []
        var decade = low
        while decade <= high {
            ticks.append(pow(10, decade))
            decade += 1
        }
        svg += axes(frame, xMax: rateMax, yTicks: ticks, yLabel: "latency ms (log)", scale: logScale, xIsRate: true)
        let x = { (rate: Double) in left + (width - left - right) * rate / rateMax }
        let lines: [(String, KeyPath<(name: String, offered: Double, p50: Double, p99: Double, max: Double), Double>)] =
            [("p50", \.p50), ("p99", \.p99), ("max", \.max)]
        let ordered = runs.sorted { $0.offered < $1.offered }
        for (offset, (name, path)) in lines.enumerated() {
            let color = colors[offset + 1]
            var points = ""
            for run in ordered {
                let px = Format.fixed(x(run.offered), 1)
                let py = Format.fixed(frame.y1 - (frame.y1 - frame.y0) * logScale(run[keyPath: path]), 1)
                points += "\(px),\(py) "
                svg += "<circle cx=\"\(px)\" cy=\"\(py)\" r=\"3\" fill=\"\(color)\"><title>\(escape(run.name)): "
                svg += "\(name) \(Format.fixed(run[keyPath: path], 2)) ms</title></circle>\n"
            }
            svg += "<polyline fill=\"none\" stroke=\"\(color)\" stroke-width=\"1.5\" points=\"\(points)\"/>\n"
            let legendX = left + 20 + Double(offset) * 60
            svg += "<rect x=\"\(legendX)\" y=\"\(frame.y0 + 6)\" width=\"12\" height=\"3\" fill=\"\(color)\"/>\n"
            svg += text(legendX + 16, frame.y0 + 11, name, size: 12)
        }
        svg += text(width / 2, height - 12, "offered rate (requests/s)", size: 12, anchor: "middle")
        return svg + "</svg>\n"
    }

    /// Horizontal bars, one per run, with the value written at the end.
    static func bars(title: String, unit: String, _ items: [(name: String, value: Double)]) -> String {
        let rowHeight = 34.0
        let height = 70 + rowHeight * Double(items.count) + 30
        let labelWidth = 260.0
        var svg = header(height: height)
        svg += text(width / 2, 24, title, size: 15, anchor: "middle", weight: "bold")
        let maxValue = max(items.map(\.value).max() ?? 1, 1e-9)
        let barMax = width - labelWidth - right - 120
        for (index, item) in items.enumerated() {
            let y = 50 + rowHeight * Double(index)
            let length = barMax * item.value / maxValue
            svg += text(labelWidth - 8, y + 20, item.name, size: 13, anchor: "end")
            svg += "<rect x=\"\(labelWidth)\" y=\"\(Format.fixed(y + 6, 1))\" width=\"\(Format.fixed(length, 1))\" "
            svg += "height=\"\(rowHeight - 12)\" fill=\"\(colors[index % colors.count])\"/>\n"
            svg += text(
                labelWidth + length + 6, y + 20, "\(Format.grouped(Int(item.value.rounded()))) \(unit)", size: 13)
        }
        return svg + "</svg>\n"
    }

    // MARK: Pieces

    private static func header(height: Double) -> String {
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" "
            + "viewBox=\"0 0 \(Int(width)) \(Int(height))\" font-family=\"sans-serif\">\n"
            + "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    }

    private static func text(
        _ x: Double, _ y: Double, _ content: String, size: Int, anchor: String = "start", weight: String = "normal"
    ) -> String {
        "<text x=\"\(Format.fixed(x, 1))\" y=\"\(Format.fixed(y, 1))\" font-size=\"\(size)\" "
            + "text-anchor=\"\(anchor)\" font-weight=\"\(weight)\">\(escape(content))</text>\n"
    }

    /// A frame with y ticks at `yTicks` (placed by `scale`, 0…1) and x ticks
    /// over 0…xMax.
    private static func axes(
        _ frame: (y0: Double, y1: Double), xMax: Double, yTicks: [Double], yLabel: String,
        scale: (Double) -> Double, xIsRate: Bool = false
    ) -> String {
        var svg = "<rect x=\"\(left)\" y=\"\(frame.y0)\" width=\"\(width - left - right)\" "
        svg += "height=\"\(frame.y1 - frame.y0)\" fill=\"none\" stroke=\"#888\"/>\n"
        for tick in yTicks {
            let y = frame.y1 - (frame.y1 - frame.y0) * scale(tick)
            guard y >= frame.y0 - 0.5 && y <= frame.y1 + 0.5 else { continue }
            svg += "<line x1=\"\(left)\" x2=\"\(width - right)\" y1=\"\(Format.fixed(y, 1))\" "
            svg += "y2=\"\(Format.fixed(y, 1))\" stroke=\"#e5e5e5\"/>\n"
            svg += text(left - 6, y + 4, tickLabel(tick), size: 11, anchor: "end")
        }
        for tick in linearTicks(niceCeiling(xMax)) where tick <= xMax {
            let x = left + (width - left - right) * tick / xMax
            svg += "<line x1=\"\(Format.fixed(x, 1))\" x2=\"\(Format.fixed(x, 1))\" y1=\"\(frame.y1)\" "
            svg += "y2=\"\(frame.y1 + 4)\" stroke=\"#888\"/>\n"
            svg += text(
                x, frame.y1 + 16, xIsRate ? Format.grouped(Int(tick)) : tickLabel(tick), size: 11, anchor: "middle")
        }
        let middle = (frame.y0 + frame.y1) / 2
        svg += "<text x=\"18\" y=\"\(Format.fixed(middle, 1))\" font-size=\"12\" text-anchor=\"middle\" "
        svg += "transform=\"rotate(-90 18 \(Format.fixed(middle, 1)))\">\(escape(yLabel))</text>\n"
        return svg
    }

    private static func tickLabel(_ value: Double) -> String {
        if value == 0 { return "0" }
        if value >= 1000 { return Format.grouped(Int(value.rounded())) }
        if value >= 1 { return value == value.rounded() ? String(Int(value)) : Format.fixed(value, 1) }
        var digits = 1
        var scaled = value
        while scaled < 1 && digits < 6 {
            scaled *= 10
            digits += 1
        }
        return Format.fixed(value, digits - 1)
    }

    /// 1, 2 or 5 × 10^k at or above `value`.
    static func niceCeiling(_ value: Double) -> Double {
        guard value > 0 else { return 1 }
        let magnitude = pow(10, floor(log10(value)))
        for step in [1.0, 2, 5, 10] where step * magnitude >= value { return step * magnitude }
        return 10 * magnitude
    }

    /// Five or so round ticks from 0 to `maximum`.
    static func linearTicks(_ maximum: Double) -> [Double] {
        let step = niceCeiling(maximum / 5)
        var ticks: [Double] = []
        var tick = 0.0
        while tick <= maximum * 1.0001 {
            ticks.append(tick)
            tick += step
        }
        return ticks
    }

    static func escape(_ text: String) -> String {
        var result = ""
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            default: result.append(character)
            }
        }
        return result
    }
}

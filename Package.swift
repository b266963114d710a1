// swift-tools-version: 6.2
// Roost: a push-device registry. Module layering follows docs/architecture.md;
// CI builds with --explicit-target-dependency-import-check=error so that an
// undeclared import fails the build.
import PackageDescription

let strict: [SwiftSetting] = [
    .treatAllWarnings(as: .error),
    .swiftLanguageMode(.v6),
]

let package = Package(
    name: "Roost",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "roost", targets: ["roost"]),
        .executable(name: "roost-bench", targets: ["roost-bench"]),
    ],
    targets: [
        // C system libraries, found through pkg-config.
        .systemLibrary(
            name: "CZstd", pkgConfig: "libzstd",
            providers: [.apt(["libzstd-dev"])]),
        .systemLibrary(
            name: "CCrypto", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]),
        // Non-variadic wrappers for epoll, eventfd, sockets and CRC-32C.
        .target(name: "CSystemShims"),

        .target(name: "RoostPlatform", dependencies: ["CSystemShims"], swiftSettings: strict),
        // Counters, histograms, the Prometheus text format and the JSON-line logger.
        .target(name: "RoostTelemetry", dependencies: ["RoostPlatform"], swiftSettings: strict),
        // SHA-256, HMAC, random bytes and constant-time comparison from libcrypto.
        .target(name: "RoostCrypto", dependencies: ["CCrypto"], swiftSettings: strict),
        .target(name: "RoostModel", dependencies: ["RoostCrypto"], swiftSettings: strict),
        .target(name: "RoostJSON", swiftSettings: strict),
        .target(
            name: "RoostEngine", dependencies: ["RoostModel", "RoostStorage", "RoostPlatform", "RoostTelemetry"],
            swiftSettings: strict),
        .target(name: "RoostHTTP", dependencies: ["RoostPlatform", "RoostTelemetry"], swiftSettings: strict),
        .target(
            name: "RoostAPI",
            dependencies: [
                "RoostHTTP", "RoostJSON", "RoostModel", "RoostEngine", "RoostPlatform", "RoostStorage", "RoostCrypto",
                "RoostTelemetry",
            ],
            // The console's files, embedded by scripts/console-assets.py (decision 0068).
            exclude: ["Console/Assets"],
            swiftSettings: strict),
        .executableTarget(
            name: "roost",
            dependencies: [
                "RoostAPI", "RoostEngine", "RoostHTTP", "RoostModel", "RoostPlatform", "RoostStorage", "RoostTelemetry",
                "RoostCluster", "RoostClusterNode",
            ],
            swiftSettings: strict),
        .target(
            name: "RoostStorage", dependencies: ["RoostPlatform", "CZstd", "CSystemShims", "RoostTelemetry"],
            swiftSettings: strict),
        // Cluster mode (spec §13): etcd requests as values, the replication state machine,
        // the etcd JSON-gateway client (our HTTP/1.1 client over RoostPlatform's sockets).
        .target(
            name: "RoostCluster", dependencies: ["RoostJSON", "RoostPlatform", "RoostStorage", "CZstd"],
            swiftSettings: strict),
        // A cluster node (spec §13): the replication machine driven against etcd
        // and the engine, on threads of its own (docs/cluster.md).
        .target(
            name: "RoostClusterNode",
            dependencies: [
                "RoostCluster", "RoostEngine", "RoostModel", "RoostPlatform", "RoostStorage", "RoostTelemetry",
            ],
            swiftSettings: strict),
        .target(
            name: "RoostTesting",
            dependencies: ["RoostPlatform", "RoostHTTP", "RoostStorage", "RoostCluster"],
            swiftSettings: strict),
        // The fuzz properties (docs/testing.md): test code, linked by the replay
        // tests and compiled into the libFuzzer drivers by the Makefile, never
        // into `roost` (decision 0074).
        .target(
            name: "RoostFuzzChecks",
            dependencies: [
                "RoostAPI", "RoostCrypto", "RoostEngine", "RoostHTTP", "RoostJSON", "RoostModel", "RoostPlatform",
                "RoostStorage", "RoostTelemetry", "RoostTesting",
            ],
            path: "Tests/RoostFuzzChecks",
            swiftSettings: strict),
        // timerfd and timer slack for the load generator (benchmarks only).
        .target(name: "CBenchShims", path: "Benchmarks/CBenchShims"),
        .executableTarget(
            name: "roost-bench",
            dependencies: [
                "CBenchShims", "RoostTesting", "RoostHTTP", "RoostJSON", "RoostPlatform", "RoostAPI", "RoostEngine",
                "RoostModel", "RoostStorage", "RoostTelemetry",
            ],
            path: "Benchmarks/roost-bench",
            swiftSettings: strict),
        // A malloc-counting shim (decision 0070): it defines malloc and free
        // for the whole process, so only roost-alloc-count may link it, never
        // roost, roost-bench or a test target.
        .target(name: "CAllocationCounter", path: "Benchmarks/CAllocationCounter"),
        // Heap allocations per request through the in-process server (issue 25
        // item 2); Tests/SystemTests/AllocationBudgetTests.swift runs it.
        .executableTarget(
            name: "roost-alloc-count",
            dependencies: [
                "CAllocationCounter", "RoostAPI", "RoostEngine", "RoostHTTP", "RoostPlatform", "RoostStorage",
                "RoostTesting",
            ],
            path: "Benchmarks/roost-alloc-count", exclude: ["symbolize.py"],
            swiftSettings: strict),

        .testTarget(
            name: "RoostEngineTests",
            dependencies: [
                "RoostEngine", "RoostFuzzChecks", "RoostModel", "RoostStorage", "RoostTesting", "RoostTelemetry",
            ],
            exclude: ["FuzzCorpus"], swiftSettings: strict),
        .testTarget(
            name: "RoostJSONTests", dependencies: ["RoostFuzzChecks", "RoostJSON", "RoostTesting"],
            exclude: ["FuzzCorpus"],
            swiftSettings: strict),
        .testTarget(
            name: "RoostAPITests",
            dependencies: [
                "RoostAPI", "RoostHTTP", "RoostJSON", "RoostModel", "RoostPlatform", "RoostEngine", "RoostStorage",
                "RoostTesting", "RoostTelemetry", "RoostCrypto", "RoostFuzzChecks",
            ],
            exclude: ["FuzzCorpus"], swiftSettings: strict),
        .testTarget(
            name: "RoostHTTPTests",
            dependencies: ["RoostFuzzChecks", "RoostHTTP", "RoostPlatform", "RoostTesting", "RoostTelemetry"],
            exclude: ["FuzzCorpus", "ConnectionFuzzCorpus"], swiftSettings: strict),
        .testTarget(
            name: "SystemTests",
            dependencies: ["RoostTesting", "RoostJSON", "RoostPlatform", "CCrypto", "RoostCluster"],
            exclude: ["Fixtures"], swiftSettings: strict),
        .testTarget(
            name: "RoostModelTests", dependencies: ["RoostModel", "RoostTesting", "RoostCrypto"], swiftSettings: strict),
        .testTarget(
            name: "RoostTelemetryTests", dependencies: ["RoostTelemetry", "RoostTesting"], swiftSettings: strict),
        .testTarget(
            name: "RoostStorageTests",
            dependencies: ["RoostFuzzChecks", "RoostStorage", "RoostPlatform", "RoostTesting", "RoostTelemetry"],
            exclude: ["Golden", "FuzzCorpus"],
            swiftSettings: strict),
        .testTarget(
            name: "RoostClusterTests",
            dependencies: [
                "RoostCluster", "RoostClusterNode", "RoostJSON", "RoostPlatform", "RoostStorage", "RoostTesting",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "SystemLibraryTests", dependencies: ["CZstd", "CCrypto", "CSystemShims"],
            swiftSettings: strict),
    ]
)

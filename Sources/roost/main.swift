import RoostAPI
import RoostHTTP
import RoostPlatform

print("usage: roost serve [--listen HOST:PORT] [--data DIR] [--fsync always|everysec|never] [--shards N]")

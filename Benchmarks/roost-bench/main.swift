import RoostJSON
import RoostPlatform
import RoostTesting

print("roost-bench: no benchmark selected")

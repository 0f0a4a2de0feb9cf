"""The trainer's side: names, pipeline.json, and the submission through the akka-optimize CLI (host, standard library)."""

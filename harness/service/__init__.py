"""The grader service (http: graders): standard library, gunicorn and prometheus_client; copied whole into its image."""

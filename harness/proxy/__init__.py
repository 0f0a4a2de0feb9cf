"""The reverse proxy in front of the grader service: nginx's configuration and its log-redacting
entry point; standard library only, copied whole into the proxy image."""

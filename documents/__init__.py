"""Materials the team links: recognise, read (with version and permission), and put into a request within budget."""

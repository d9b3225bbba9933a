"""`recalld index`: folders of markdown and source trees uploaded through the API."""

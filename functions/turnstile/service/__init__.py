"""The service layer the HTTP API and the command line share: create, change, close and show
events; submit, confirm, cancel and read signups; the views every answer is shaped by.
"""
